"""Test support any provider can use: throwaway databases and the conformance kit."""
