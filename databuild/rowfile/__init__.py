"""The native row file: its schema and hashes, its writer."""
