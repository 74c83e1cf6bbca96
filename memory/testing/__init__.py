"""Test support any provider can use: throwaway databases and the conformance kit."""

try:  # the kit's plain asserts get pytest's detailed failure messages
    import pytest

    pytest.register_assert_rewrite("memory.testing.conformance")
except ImportError:  # pytest is a dev dependency; the package imports without it
    pass
