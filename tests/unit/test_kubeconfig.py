"""Issue 70 item 6: every kubeconfig a user can get wrong is one line that names the file,
where its path came from (--kubeconfig, $KUBECONFIG, the default) and what to do; never
a traceback, never the client library's words."""

from __future__ import annotations

import pytest

from .helpers import disttrain

CLUSTER = ("clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
           "users: [{name: u, user: {token: t}}]\n")


def run_with(monkeypatch, path: str, *, flag: bool = False):
    """`disttrain get` with PATH as $KUBECONFIG (or as --kubeconfig); its one stderr line."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if flag:
        monkeypatch.delenv("KUBECONFIG", raising=False)
        result = disttrain("get", "--kubeconfig", path)
    else:
        monkeypatch.setenv("KUBECONFIG", path)
        result = disttrain("get")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "Invalid kube-config" not in line and "Expected" not in line, line  # the library's words
    return line


@pytest.mark.parametrize("flag", [False, True])
def test_a_directory_is_named_with_the_file_to_point_at_instead(tmp_path, monkeypatch, flag):
    (tmp_path / "config").write_text("")
    line = run_with(monkeypatch, str(tmp_path), flag=flag)
    source = "--kubeconfig" if flag else "KUBECONFIG"
    assert line == (f"error: {source}={tmp_path} is a directory, not a kubeconfig file: "
                    f"point {source} at the file itself (here: {tmp_path}/config)"), line


def test_a_missing_file_named_by_kubeconfig_says_kubeconfig_names_it_not_to_set_it(tmp_path, monkeypatch):
    missing = tmp_path / "gone.yaml"
    line = run_with(monkeypatch, str(missing))
    assert line.startswith(f"error: KUBECONFIG={missing}: no such file: "), line
    assert "set KUBECONFIG" not in line and "point KUBECONFIG at an existing kubeconfig" in line, line
    line = run_with(monkeypatch, str(missing), flag=True)
    assert line.startswith(f"error: --kubeconfig={missing}: no such file: "), line


@pytest.mark.parametrize("text,says", [
    ("a: 1\n", "not a kubeconfig: it has no clusters, contexts or users (its keys: a); "
               "point KUBECONFIG at a kubeconfig file"),
    ("", "the file is empty: point KUBECONFIG at a kubeconfig file"),
    ("apiVersion: v1\nkind: Config\n" + CLUSTER + "contexts: [{name: c, context: {cluster: k, user: u}}]\n",
     "no current context: pass --context c, or run `kubectl config use-context c`"),
    ("apiVersion: v1\nkind: Config\ncontexts: []\ncurrent-context: foo\n",
     'current-context "foo" is not one of its contexts (it has none): '
     "run `kubectl config use-context NAME`, or pass --context NAME"),
    ("apiVersion: v1\n" + CLUSTER + "contexts: [{name: c, context: {cluster: nope, user: u}}]\ncurrent-context: c\n",
     'context "c" names the cluster "nope", which the file does not have (it has: k): '
     "fix the context, or run `kubectl config set-context c --cluster NAME`"),
])
def test_a_file_that_is_not_a_usable_kubeconfig_says_why_and_the_fix(tmp_path, monkeypatch, text, says):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    line = run_with(monkeypatch, str(path))
    assert line == f"error: {path}: {says}", line


def test_a_cluster_that_is_down_is_named_with_the_file_its_server_comes_from(tmp_path, monkeypatch):
    """Nothing listens at the context's server (a local cluster stopped): kubectl's words,
    then the fix, naming the file whose server that is."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\n" + CLUSTER + "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                    "current-context: c\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    result = disttrain("get")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == ("Unable to connect to the server https://127.0.0.1:1: connection refused - did you "
                             "specify the right host or port? Start the cluster (make cluster-up for a local "
                             f"one), or fix its server in KUBECONFIG={path}\n"), result.stderr
