"""What the CLI's commands share: the input error they raise and the exit codes they end with."""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """A problem with what the user gave us; printed as one line, exit code 2."""
