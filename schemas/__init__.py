"""Event contracts of dreamstream: validated dataclasses, JSON Schemas and the AsyncAPI document."""
