"""Small helpers below every room, imported by whoever needs them: a file replaced durably and hashed
(`files`), the versions of the libraries a build ran with (`versions`), and the machine's core count
(`machine`). Nothing here imports another room of the package."""
