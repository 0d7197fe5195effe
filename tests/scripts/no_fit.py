"""A script that trains nothing."""

print("nothing to train")
