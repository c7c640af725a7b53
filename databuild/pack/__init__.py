"""Packing: tokenized conversations into fixed-length rows. A registry of policies (`policy`), one
module each (`concat`, `bfd`); what every policy takes and counts (`rows`: Packing, PackStats); the
rows they yield are records.row.Row."""
