"""Host build of a manifest into a static, hashable `Built` (not named `build/`: `.gitignore`
ignores that name), and what can vary per world against a build (`vary.py`)."""
