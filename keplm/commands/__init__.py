"""The ``keplm`` command-line tools (``keplm <command> --help``)."""
