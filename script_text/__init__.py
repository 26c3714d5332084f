"""Script text, torch-free: parsing, validation and warnings (`parser`), speech normalisation (`speech_text`),
planning and segment estimates (`plan`), the prompt's text (`prompt`), turn timings (`timeline`), and the
drafting stage's prompts, replies and retry loop (`drafting`).

The api, the studio and the CLI's checks use it without loading a model: nothing here imports torch,
transformers, numpy, Celery or SQLAlchemy (tests/test_import_contract.py holds it to that).
"""
