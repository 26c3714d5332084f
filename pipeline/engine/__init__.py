"""The serving engine: requests and their events (`requests`), the scheduler's policies (`scheduler`, pure Python), the
K/V block books (`kv_blocks`, pure Python), the engine's loop (`engine`), the runner's tensors (`runner`,
`paged_kv`, `frame_step`, `fixed_decoder`) and the one place joining them (`factory`).

Import from the module that defines a name: this package imports nothing, so the scheduler and the block books load
without torch.
"""
