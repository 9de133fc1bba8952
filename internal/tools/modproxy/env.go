package modproxy

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Env returns the environment for a go command that must resolve the repository's
// modules from the file proxy at dir (an absolute path) and nothing from the work tree:
// GOWORK=off, GOPROXY=file://dir, then the module cache of the calling environment as a
// file proxy (so nothing already downloaded is fetched again), then the calling
// environment's GOPROXY; GONOSUMDB for the repository's module paths only (their sums
// cannot be in the checksum database before release; every other module is still
// verified); GOMODCACHE=modcache, a fresh cache, so a stale copy of an unreleased
// version can never be used; GOFLAGS=-mod=mod -modcacherw -trimpath (go.mod and go.sum
// may be completed, the cache can be deleted, and build cache entries do not depend on
// the scratch directories, so a second run reuses the compiled dependencies);
// GOTOOLCHAIN=local. The rest of os.Environ is
// kept. Errors: the go command cannot be run.
func Env(dir, modcache string) ([]string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	proxy := []string{fileURL(dir)}
	if len(lines) > 0 && lines[0] != "" {
		proxy = append(proxy, fileURL(filepath.Join(lines[0], "cache", "download")))
	}
	if len(lines) > 1 && lines[1] != "" && lines[1] != "off" {
		proxy = append(proxy, lines[1])
	}
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOPROXY", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GOWORK=off",
		"GOPROXY="+strings.Join(proxy, ","),
		"GONOSUMDB="+CorePath,
		"GONOPROXY=",
		"GOPRIVATE=",
		"GOMODCACHE="+modcache,
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOTOOLCHAIN=local",
	), nil
}

func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}
