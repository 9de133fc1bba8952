package modproxy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentserve/sessionaffinity/internal/tools/modproxy"
)

// Local development: from every module's directory the go command finds the root
// go.work, and every repository module it resolves — at the required, unpublished
// version — is the work tree's directory. The committed go.work is the one `make work`
// writes.
func TestWorkspaceResolvesTheTree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	root := repoRoot(t)
	mods, err := modproxy.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	version, err := modproxy.WorkVersion(mods)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	if want := string(modproxy.WorkFile(mods, version)); string(committed) != want {
		t.Errorf("go.work is not what `make work` writes; run make work.\ngot:\n%s\nwant:\n%s", committed, want)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GOTOOLCHAIN=local", "GOPROXY=off") // nothing may be fetched
	for _, m := range mods {
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		if got := strings.TrimSpace(goCmd(t, dir, env, "env", "GOWORK")); got != filepath.Join(root, "go.work") {
			t.Errorf("in %s: GOWORK = %q, want the root go.work", m.Dir, got)
		}
		for _, o := range mods {
			got := strings.TrimSpace(goCmd(t, dir, env, "list", "-m", "-f", "{{.Dir}}", o.Path))
			if want := filepath.Join(root, filepath.FromSlash(o.Dir)); got != want {
				t.Errorf("in %s: %s resolves to %q, want the work tree %q", m.Dir, o.Path, got, want)
			}
		}
	}
}
