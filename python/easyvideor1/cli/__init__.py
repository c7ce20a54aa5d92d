"""The ``evr1`` command line. Each command group is a module here with ``register(subparsers)``."""
