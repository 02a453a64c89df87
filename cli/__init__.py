"""The ``sotopia-env`` command line. Each module holds one command group; heavy imports stay inside commands."""
