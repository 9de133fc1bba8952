package modproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// CorePath is the module path of the repository's root (core) module.
const CorePath = "github.com/agentserve/sessionaffinity"

// Errors returned (wrapped with the module and the offending value) by [Discover],
// [Module.Check] and [Write].
var (
	// ErrLocalReplace: a module replaces one of the repository's modules. Consumers would
	// need that replace too; local development goes through go.work instead.
	ErrLocalReplace = errors.New("modproxy: replace of a repository module")
	// ErrPlaceholder: a module requires a repository module at a pseudo-version (such as
	// the placeholder v0.0.0-00010101000000-000000000000) that no tag can ever provide.
	ErrPlaceholder = errors.New("modproxy: requirement on a repository module is not a release version")
	// ErrVersionMismatch: modules require the repository's modules at different versions.
	ErrVersionMismatch = errors.New("modproxy: repository modules required at different versions")
	// ErrNoModules: the root holds no go.mod.
	ErrNoModules = errors.New("modproxy: no modules found")
)

// Module is one Go module of the repository.
type Module struct {
	Path  string   // module path, e.g. github.com/agentserve/sessionaffinity/metrics/prometheus
	Dir   string   // directory relative to the repository root, slash-separated; "." for the root
	Files []string // files of the module, relative to Dir: tracked or untracked-but-not-ignored, nested modules excluded
	GoMod []byte   // the go.mod file's content
	file  *modfile.File
}

// TagPrefix is the prefix of the module's release tags: "" for the root module,
// Dir + "/" for a nested one (e.g. "metrics/prometheus/", so its tag is
// "metrics/prometheus/v0.2.0").
func (m Module) TagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir + "/"
}

// Discover lists the modules of the git work tree at root: every go.mod that git tracks
// or would track (untracked files not ignored by .gitignore count, so a module being
// added is found before its first commit), outside testdata directories. Each module's
// file list excludes the directories of modules nested in it, as a module zip does.
// Modules are sorted by Dir ("." first). Errors: git failures, unreadable or invalid
// go.mod files, [ErrNoModules].
func Discover(root string) ([]Module, error) {
	files, err := gitFiles(root)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, f := range files {
		if path.Base(f) != "go.mod" || slices.Contains(strings.Split(f, "/"), "testdata") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("modproxy: %s has no module line", f)
		}
		mods = append(mods, Module{Path: mf.Module.Mod.Path, Dir: path.Dir(f), GoMod: data, file: mf})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%w under %s", ErrNoModules, root)
	}
	slices.SortFunc(mods, func(a, b Module) int {
		if a.Dir == "." || b.Dir == "." {
			return boolCmp(b.Dir == ".", a.Dir == ".")
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	for _, f := range files {
		if m := owner(mods, f); m != nil {
			m.Files = append(m.Files, strings.TrimPrefix(f, m.TagPrefix()))
		}
	}
	return mods, nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// owner returns the innermost module whose directory holds file f.
func owner(mods []Module, f string) *Module {
	var best *Module
	for i := range mods {
		m := &mods[i]
		if m.Dir == "." || strings.HasPrefix(f, m.Dir+"/") {
			if best == nil || len(m.Dir) > len(best.Dir) || best.Dir == "." {
				best = m
			}
		}
	}
	return best
}

// gitFiles lists the work tree's files as git would ship them: tracked ones (that still
// exist) and untracked ones not ignored.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("modproxy: git ls-files in %s: %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || slices.Contains(files, f) {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil || !fi.Mode().IsRegular() {
			continue // deleted but not yet committed, or a symlink
		}
		files = append(files, f)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// Check reports how m depends on the repository's modules (paths in repo): an error
// wrapping [ErrLocalReplace] for any replace of one of them, [ErrPlaceholder] for a
// requirement at a pseudo-version or a non-semver version. It returns the versions
// required, by module path.
func (m Module) Check(repo []Module) (map[string]string, error) {
	own := map[string]bool{}
	for _, r := range repo {
		own[r.Path] = true
	}
	var errs []error
	for _, r := range m.file.Replace {
		if own[r.Old.Path] {
			errs = append(errs, fmt.Errorf("%w: %s (%s/go.mod) replaces %s => %s; drop it, go.work covers local development",
				ErrLocalReplace, m.Path, m.Dir, r.Old.Path, r.New.Path))
		}
	}
	req := map[string]string{}
	for _, r := range m.file.Require {
		if !own[r.Mod.Path] {
			continue
		}
		v := r.Mod.Version
		if !semver.IsValid(v) || module.IsPseudoVersion(v) || semver.Build(v) != "" {
			errs = append(errs, fmt.Errorf("%w: %s (%s/go.mod) requires %s %s; require the release version (see RELEASING.md)",
				ErrPlaceholder, m.Path, m.Dir, r.Mod.Path, v))
			continue
		}
		req[r.Mod.Path] = v
	}
	return req, errors.Join(errs...)
}

// CheckAll runs [Module.Check] on every module and joins the errors.
func CheckAll(mods []Module) error {
	var errs []error
	for _, m := range mods {
		if _, err := m.Check(mods); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RequiredVersion checks every module (see [Module.Check]) and returns the one version at
// which they require the repository's modules. Errors: the joined Check errors, or
// [ErrVersionMismatch] naming the requirements, or an error if no module requires another
// (then there is nothing to infer the version from: pass it explicitly).
func RequiredVersion(mods []Module) (string, error) {
	var errs []error
	versions := map[string][]string{} // version -> "module requires path"
	for _, m := range mods {
		req, err := m.Check(mods)
		if err != nil {
			errs = append(errs, err)
		}
		for p, v := range req {
			versions[v] = append(versions[v], m.Path+" requires "+p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	switch len(versions) {
	case 0:
		return "", errors.New("modproxy: no module requires a repository module; give the version explicitly")
	case 1:
		for v := range versions {
			return v, nil
		}
	}
	var desc []string
	for v, who := range versions {
		slices.Sort(who)
		desc = append(desc, v+": "+strings.Join(who, ", "))
	}
	slices.Sort(desc)
	return "", fmt.Errorf("%w: %s", ErrVersionMismatch, strings.Join(desc, "; "))
}

// Write lays out a file-based module proxy in out (GOPROXY=file:///abs/out) holding every
// module in mods at version, built from the work tree at root: for each module
// <escaped path>/@v/list, <version>.info, <version>.mod and <version>.zip (made by
// golang.org/x/mod/zip, which enforces the module zip rules). An existing out is added
// to; a version already in it is overwritten. Costs one zip per module.
func Write(root, out, version string, mods []Module) error {
	if !semver.IsValid(version) || semver.Build(version) != "" {
		return fmt.Errorf("modproxy: version %q is not a semantic version like v0.2.0", version)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, m := range mods {
		mv := module.Version{Path: m.Path, Version: version}
		if err := module.Check(mv.Path, mv.Version); err != nil {
			return fmt.Errorf("modproxy: %s: %w", m.Dir, err)
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		base := filepath.Join(dir, version)
		if err := os.WriteFile(base+".info", info, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(base+".mod", m.GoMod, 0o644); err != nil {
			return err
		}
		if err := writeZip(base+".zip", root, m, mv); err != nil {
			return err
		}
		if err := addToList(filepath.Join(dir, "list"), version); err != nil {
			return err
		}
	}
	return nil
}

func writeZip(name, root string, m Module, mv module.Version) error {
	var files []zip.File
	for _, f := range m.Files {
		files = append(files, zipFile{rel: f, abs: filepath.Join(root, filepath.FromSlash(m.Dir), filepath.FromSlash(f))})
	}
	w, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := zip.Create(w, mv, files); err != nil {
		_ = w.Close()
		return fmt.Errorf("modproxy: zip of %s: %w", m.Path, err)
	}
	return w.Close()
}

func addToList(name, version string) error {
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	list := strings.Fields(string(data))
	if !slices.Contains(list, version) {
		list = append(list, version)
	}
	semver.Sort(list)
	return os.WriteFile(name, []byte(strings.Join(list, "\n")+"\n"), 0o644)
}

// zipFile is a work-tree file for zip.Create.
type zipFile struct{ rel, abs string }

func (f zipFile) Path() string                 { return f.rel }
func (f zipFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f zipFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }
