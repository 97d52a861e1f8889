// The pod sandbox ("pause") binary for the real node's locally built pause image.
module disttrain.dev/hack/tools/pause

go 1.26.0
