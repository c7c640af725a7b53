"""Looking at rows: `show` in the terminal, `report` as one HTML page."""
