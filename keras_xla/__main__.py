"""Runs the `keras-xla` command line: `python -m keras_xla ...`."""

from keras_xla.cli import main

raise SystemExit(main())
