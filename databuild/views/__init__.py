"""Looking at rows, read back through rowfile/: `show` in the terminal, `report` as one HTML page
(`charts`, its figures from `row_stats`), `diff`'s text; `marks` finds the tool calls, results and
reasoning a row's markup shows, `record_marks` (with `arguments`) where the record puts them."""
