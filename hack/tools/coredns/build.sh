# CoreDNS with only the plugins our Corefiles name (main.go).
build coredns . -ldflags "-s -w"
