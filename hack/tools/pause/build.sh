# The pod sandbox's first process, for the locally built pause image.
build pause . -ldflags "-s -w"
