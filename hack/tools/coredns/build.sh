# CoreDNS with only the plugins the cluster zone needs (main.go).
build coredns . -ldflags "-s -w"
