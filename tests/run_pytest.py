"""Runs the Python suite (the `main` of BUILD's py_test): `python tests/run_pytest.py [pytest args]`."""
import os
import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main([os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:]))
