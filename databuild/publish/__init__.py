"""Publishing a build: what its manifest is made of (`record`), the manifest written last (`manifest`),
read back (`manifest_read`) and compared (`manifest_diff`), the funnel of every source row (`funnel`),
the output's lock (`lock`), and the recipe write-back (`recipe`, `yaml_splice`)."""
