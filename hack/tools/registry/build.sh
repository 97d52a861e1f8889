# registry: the CNCF distribution registry (registry:3's binary), served on loopback by
# tests/e2e/test_registry_install.py for `make push` and the real node's pulls.
build registry github.com/distribution/distribution/v3/cmd/registry -ldflags "-s -w"
