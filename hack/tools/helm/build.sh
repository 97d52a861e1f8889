build helm helm.sh/helm/v4/cmd/helm \
  -ldflags "-s -w -X 'helm.sh/helm/v4/internal/version.version=$(modver helm helm.sh/helm/v4)' \
    -X 'helm.sh/helm/v4/internal/version.gitTreeState=clean'"
