"""Code that runs inside a trainer's process, reading databuild's exports there. It imports nothing
from the trainer: what it needs of the trainer's objects is their documented fields."""
