package modproxy_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/agentserve/sessionaffinity/internal/tools/modproxy"
)

// repoRoot is the repository root, three levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

const consumerMain = `package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/affinity"
	promrec "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

func main() {
	reg := prometheus.NewRegistry()
	rec, err := promrec.New(reg)
	if err != nil {
		panic(err)
	}
	sched, err := affinity.New(affinity.Config{}, affinity.WithRecorder(rec))
	if err != nil {
		panic(err)
	}
	bs := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
	}
	_, hit1, _ := sched.SelectBackend("session-1", "", bs)
	_, hit2, _ := sched.SelectBackend("session-1", "", bs)
	fmt.Println("hits:", hit1, hit2)
}
`

// TestConsumerModule is what a user of the library does, outside this repository: a new
// module that runs `go get github.com/agentserve/sessionaffinity@v0.2.0` (and the
// Prometheus adapter at the same version), with no replace directive and no go.work,
// builds and runs. The modules come from a file proxy made from the work tree at the
// version the nested modules require.
func TestConsumerModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module with the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("no go command on PATH")
	}
	root := repoRoot(t)
	mods, err := modproxy.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	version, err := modproxy.RequiredVersion(mods)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	if err := modproxy.Write(root, proxy, version, mods); err != nil {
		t.Fatal(err)
	}
	env, err := modproxy.Env(proxy, filepath.Join(tmp, "modcache"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "consumer") // outside the repository: no go.work above it
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(consumerMain), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, dir, env, "mod", "init", "example.com/consumer")
	goCmd(t, dir, env, "get", modproxy.CorePath+"@"+version, modproxy.CorePath+"/metrics/prometheus@"+version)
	goCmd(t, dir, env, "mod", "tidy")
	if got := strings.TrimSpace(goCmd(t, dir, env, "env", "GOWORK")); got != "" && got != "off" {
		t.Fatalf("GOWORK = %q: the consumer must not be in a workspace", got)
	}

	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Replace) != 0 {
		t.Errorf("consumer go.mod has replace directives:\n%s", data)
	}
	want := map[string]string{modproxy.CorePath: version, modproxy.CorePath + "/metrics/prometheus": version}
	for _, r := range mf.Require {
		if v, ok := want[r.Mod.Path]; ok {
			if r.Mod.Version != v {
				t.Errorf("consumer requires %s %s, want %s", r.Mod.Path, r.Mod.Version, v)
			}
			delete(want, r.Mod.Path)
		}
	}
	if len(want) != 0 {
		t.Errorf("consumer go.mod lacks %v:\n%s", want, data)
	}

	bin := filepath.Join(tmp, "consumer-bin")
	goCmd(t, dir, env, "build", "-o", bin, ".")
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("consumer: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "hits: false true" {
		t.Errorf("consumer printed %q, want %q", got, "hits: false true")
	}
}

// The module rules: a replace of a repository module, a placeholder requirement and
// modules disagreeing on the version are errors that name the module.
func TestCheckRules(t *testing.T) {
	core := "module " + modproxy.CorePath + "\n\ngo 1.24.0\n"
	tests := []struct {
		name    string
		nested  map[string]string // dir -> go.mod
		wantErr error
		want    string
	}{
		{
			name: "release versions",
			nested: map[string]string{
				"a":   "module " + modproxy.CorePath + "/a\n\ngo 1.24.0\n\nrequire " + modproxy.CorePath + " v0.2.0\n",
				"b/c": "module " + modproxy.CorePath + "/b/c\n\ngo 1.24.0\n\nrequire (\n\t" + modproxy.CorePath + " v0.2.0\n\t" + modproxy.CorePath + "/a v0.2.0\n)\n",
			},
			want: "v0.2.0",
		},
		{
			name: "placeholder and replace",
			nested: map[string]string{
				"a": "module " + modproxy.CorePath + "/a\n\ngo 1.24.0\n\nreplace " + modproxy.CorePath + " => ../\n\nrequire " + modproxy.CorePath + " v0.0.0-00010101000000-000000000000\n",
			},
			wantErr: modproxy.ErrLocalReplace,
		},
		{
			name: "placeholder alone",
			nested: map[string]string{
				"a": "module " + modproxy.CorePath + "/a\n\ngo 1.24.0\n\nrequire " + modproxy.CorePath + " v0.0.0-00010101000000-000000000000\n",
			},
			wantErr: modproxy.ErrPlaceholder,
		},
		{
			name: "mismatch",
			nested: map[string]string{
				"a": "module " + modproxy.CorePath + "/a\n\ngo 1.24.0\n\nrequire " + modproxy.CorePath + " v0.2.0\n",
				"b": "module " + modproxy.CorePath + "/b\n\ngo 1.24.0\n\nrequire " + modproxy.CorePath + " v0.1.0\n",
			},
			wantErr: modproxy.ErrVersionMismatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(rel, content string) {
				p := filepath.Join(dir, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("go.mod", core)
			write("core.go", "package core\n")
			for d, gm := range tt.nested {
				write(d+"/go.mod", gm)
				write(d+"/x.go", "package x\n")
			}
			cmd := exec.Command("git", "init", "-q")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git init: %v\n%s", err, out)
			}
			mods, err := modproxy.Discover(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(mods) != 1+len(tt.nested) || mods[0].Dir != "." {
				t.Fatalf("Discover found %+v", mods)
			}
			for _, m := range mods {
				for _, f := range m.Files {
					if strings.Contains(f, "/go.mod") {
						t.Errorf("module %s holds a nested module's file %s", m.Dir, f)
					}
				}
			}
			got, err := modproxy.RequiredVersion(mods)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("RequiredVersion = %q, %v; want %q", got, err, tt.want)
			}
			if err := modproxy.Write(dir, filepath.Join(dir, "proxy"), got, mods); err != nil {
				t.Fatal(err)
			}
			for _, m := range mods {
				esc := strings.ReplaceAll(m.Path, "/", string(filepath.Separator))
				for _, f := range []string{"list", got + ".info", got + ".mod", got + ".zip"} {
					if _, err := os.Stat(filepath.Join(dir, "proxy", esc, "@v", f)); err != nil {
						t.Errorf("proxy lacks %s of %s: %v", f, m.Path, err)
					}
				}
			}
			work := string(modproxy.WorkFile(mods, got))
			for _, m := range mods {
				if !strings.Contains(work, m.Path+" "+got+" => ") {
					t.Errorf("go.work lacks the replace of %s:\n%s", m.Path, work)
				}
			}
		})
	}
}
