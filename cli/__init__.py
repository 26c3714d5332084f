"""The `voxcast` command line."""
