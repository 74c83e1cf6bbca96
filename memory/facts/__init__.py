"""The fact store every SQL provider shares (through `SharedStores`): the profile as
dated facts with evidence, their operations, reads, rendering and forget propagation.
The contract is memory/contract/facts.py."""
