"""Small helpers below every room, imported by whoever needs them: a file replaced durably and hashed
(`files`), the versions of the libraries a build ran with (`versions`), the machine's core count
(`machine`), and JSON parsed with a bound on its nesting (`json_depth`). Nothing here imports another
room of the package."""
