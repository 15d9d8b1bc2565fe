"""Host build of a manifest into a static, hashable `Built` (not named `build/`: `.gitignore`
ignores that name)."""
