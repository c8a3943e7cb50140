"""The serving image and releases: image facts, labels and verification (image), the Dockerfile as data
(dockerfile), and the pins a release must satisfy (pins)."""
