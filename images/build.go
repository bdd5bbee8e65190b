// Package images builds the container images shellbox sandboxes run in,
// without a registry:
//
//   - BuildOffline makes the default sandbox image (shellbox-sandbox:bookworm)
//     with debootstrap from the host's configured Debian mirror, then
//     `docker import`s the rootfs, or archives it as an OCI image for
//     containerd or a file.
//   - BuildTest makes the tiny CI image (shellbox-test:latest) from the host's
//     own binaries in about a second (testimage/build.sh, embedded here);
//     BuildTestImage also into containerd or a file.
//
// For Docker both shell out to the docker CLI (and BuildOffline to
// debootstrap, tar and chroot). For containerd, NewArchive writes an OCI
// image layout tar of the rootfs directory and ImportContainerd imports and
// unpacks it through containerd's client; no docker needed. Nothing is pulled. A shellbox image needs nothing but a shell: the
// agent binary is bind-mounted into every sandbox. See README.md.
package images

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/internal/mountinfo"
)

// Image names and labels.
const (
	// SandboxImage is the tag BuildOffline produces by default.
	SandboxImage = "shellbox-sandbox:bookworm"
	// TestImage is the tag BuildTest produces.
	TestImage = "shellbox-test:latest"

	// LabelImage marks every image built here: "sandbox" or "test".
	LabelImage = "org.shellbox.image"
	// LabelSuite is the Debian suite of a debootstrapped image.
	LabelSuite = "org.shellbox.debian.suite"
	// LabelTest marks containers started by tests, so leftovers can be found
	// and removed (docker rm -f $(docker ps -aq --filter label=org.shellbox.test=1)).
	LabelTest = "org.shellbox.test"

	// MirrorEnv overrides the Debian mirror BuildOffline uses.
	MirrorEnv = "SHELLBOX_DEBIAN_MIRROR"

	// SandboxUID is the uid (and gid) of the non-root user "sandbox" in every
	// image; /workspace belongs to it.
	SandboxUID = 1000
)

// DefaultPackages are installed into the sandbox image on top of the minbase
// variant (the same list as sandbox/Dockerfile).
var DefaultPackages = []string{
	"bash", "coreutils", "findutils", "grep", "sed", "git", "python3",
	"curl", "procps", "ca-certificates",
}

//go:embed testimage/build.sh
var testImageScript string

// Options configure BuildOffline. The zero value builds SandboxImage from
// bookworm with DefaultPackages from the host's apt mirror.
type Options struct {
	Tag      string   // image tag; default SandboxImage
	Suite    string   // Debian suite; default "bookworm"
	Mirror   string   // default: $SHELLBOX_DEBIAN_MIRROR, else the host's apt sources
	Packages []string // default DefaultPackages
	Arch     string   // debootstrap --arch; default the host's

	// WorkDir is where the temporary rootfs directory is created (it needs a
	// few hundred MB, on a filesystem that allows device nodes); default
	// os.TempDir().
	WorkDir string
	// KeepDocs keeps documentation, man pages and translations. By default
	// they are removed (but copyright files) and dpkg is told to leave them
	// out of later installs, as debian:*-slim images do: about 70 MB less.
	KeepDocs bool
	// KeepRootfs leaves the rootfs directory in place (its path is printed).
	KeepRootfs bool
	// Labels are added to the image's own labels.
	Labels map[string]string

	// Containerd, when not nil, receives the image instead of Docker: the
	// rootfs is archived as an OCI image and imported with ImportContainerd.
	Containerd *Containerd
	// Output, when set, is a file the OCI image archive is written to
	// instead of Docker (with Containerd, as well): for hosts without
	// network, `ctr -n shellbox images import FILE` there.
	Output string

	Docker      string // docker CLI; default "docker"
	Debootstrap string // default "debootstrap"
	// APTRoot is the root whose etc/apt sources are read to find the mirror;
	// default "/". For tests.
	APTRoot string
}

func (o *Options) defaults() {
	if o.Tag == "" {
		o.Tag = SandboxImage
	}
	if o.Suite == "" {
		o.Suite = "bookworm"
	}
	if len(o.Packages) == 0 {
		o.Packages = DefaultPackages
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.Docker == "" {
		o.Docker = "docker"
	}
	if o.Debootstrap == "" {
		o.Debootstrap = "debootstrap"
	}
	if o.APTRoot == "" {
		o.APTRoot = "/"
	}
}

// BuildOffline builds the sandbox image without a registry: debootstrap
// --variant=minbase of opts.Suite with opts.Packages from the Debian mirror,
// a user "sandbox" (uid/gid 1000) and /workspace owned by it, apt caches
// removed, then `tar | docker import` with labels, or (opts.Containerd,
// opts.Output) an OCI image archive imported into containerd or written to a
// file. It needs root (debootstrap and chroot do), debootstrap, and for
// Docker tar and the docker CLI, and takes a minute or a few. Progress lines go to progress (nil discards them).
func BuildOffline(ctx context.Context, opts Options, progress io.Writer) (err error) {
	opts.defaults()
	p := newProgress(progress)
	start := time.Now()

	if os.Geteuid() != 0 {
		return errors.New("offline image build: must run as root (debootstrap and chroot need it)")
	}
	toDocker := opts.Containerd == nil && opts.Output == ""
	tools := []struct{ name, hint string }{
		{opts.Debootstrap, "apt-get install debootstrap"},
		{"chroot", "apt-get install coreutils"},
	}
	if toDocker {
		tools = append(tools, struct{ name, hint string }{opts.Docker, "install the docker CLI, or build for containerd (--containerd) or into a file (--output)"},
			struct{ name, hint string }{"tar", "apt-get install tar"})
	}
	platform, err := DebianPlatform(opts.Arch)
	if err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	if opts.Containerd != nil {
		if err := opts.Containerd.Ping(ctx); err != nil {
			return fmt.Errorf("offline image build: %w", err)
		}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Errorf("offline image build: %s not found (%s)", tool.name, tool.hint)
		}
	}

	mirror, from := opts.Mirror, "options"
	if mirror == "" {
		if mirror = strings.TrimSpace(os.Getenv(MirrorEnv)); mirror != "" {
			from = "$" + MirrorEnv
		}
	}
	if mirror == "" {
		mirror, from, err = MirrorFromAPT(opts.APTRoot, opts.Suite)
		if err != nil {
			return fmt.Errorf("offline image build: %w (set %s)", err, MirrorEnv)
		}
	}
	p.step("building %s: debootstrap %s from %s (mirror from %s)", opts.Tag, opts.Suite, mirror, from)

	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	work, err := os.MkdirTemp(opts.WorkDir, "shellbox-sandbox-")
	if err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	rootfs := filepath.Join(work, "rootfs")
	defer func() {
		if opts.KeepRootfs {
			p.step("rootfs kept at %s", rootfs)
			return
		}
		if cerr := removeRootfs(work); cerr != nil {
			p.step("warning: %v", cerr)
			if err == nil {
				err = cerr
			}
		}
	}()

	// 1. debootstrap.
	args := []string{"--variant=minbase", "--include=" + strings.Join(opts.Packages, ",")}
	if opts.Arch != "" {
		args = append(args, "--arch="+opts.Arch)
	}
	args = append(args, opts.Suite, rootfs, mirror)
	p.step("debootstrap %s", strings.Join(args, " "))
	t := time.Now()
	logFile, err := os.CreateTemp(opts.WorkDir, "shellbox-debootstrap-*.log")
	if err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	p.step("debootstrap's own output goes to %s", logFile.Name())
	err = p.runLogged(ctx, "debootstrap", logFile, exec.CommandContext(ctx, opts.Debootstrap, args...))
	logFile.Close()
	if err != nil {
		if log, rerr := os.ReadFile(logFile.Name()); rerr == nil {
			p.tail(logFile.Name(), log, 20)
		}
		if log, rerr := os.ReadFile(filepath.Join(rootfs, "debootstrap", "debootstrap.log")); rerr == nil {
			p.tail("debootstrap.log", log, 20)
		}
		return fmt.Errorf("offline image build: debootstrap (its output: %s): %w", logFile.Name(), err)
	}
	os.Remove(logFile.Name())
	p.step("debootstrap done in %s", since(t))

	// 2. The sandbox user and /workspace.
	p.step("adding user sandbox (%d) and /workspace", SandboxUID)
	uid := strconv.Itoa(SandboxUID)
	for _, argv := range [][]string{
		{"groupadd", "--gid", uid, "sandbox"},
		{"useradd", "--uid", uid, "--gid", uid, "--create-home", "--shell", "/bin/bash", "sandbox"},
	} {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{rootfs}, argv...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
		if err := p.run(ctx, argv[0], cmd); err != nil {
			return fmt.Errorf("offline image build: %s: %w", argv[0], err)
		}
	}
	ws := filepath.Join(rootfs, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("offline image build: %w", err)
	}
	if err := os.Chown(ws, SandboxUID, SandboxUID); err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}

	// 3. Trim: package caches and lists, logs, and the host files debootstrap
	// copied in (Docker mounts its own resolv.conf, hostname and hosts).
	p.step("cleaning apt caches, logs and host files")
	if err := trimRootfs(rootfs); err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	if !opts.KeepDocs {
		p.step("removing docs, man pages and translations (slim)")
		if err := slimRootfs(rootfs); err != nil {
			return fmt.Errorf("offline image build: %w", err)
		}
	}

	// 4. tar | docker import, or an OCI archive for containerd or a file.
	labels := map[string]string{
		LabelImage:                         "sandbox",
		LabelSuite:                         opts.Suite,
		"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339),
		"org.opencontainers.image.title":   "shellbox sandbox (Debian " + opts.Suite + ", debootstrap)",
	}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	if !toDocker {
		p.step("archiving %s as an OCI image", opts.Tag)
		a, err := NewArchive(ctx, rootfs, ImageSpec{
			Name:     opts.Tag,
			Labels:   labels,
			Created:  time.Now(),
			Comment:  "shellbox sandbox image (debootstrap " + opts.Suite + ")",
			Platform: platform,
			TempDir:  work,
		})
		if err != nil {
			return fmt.Errorf("offline image build: %w", err)
		}
		defer a.Close()
		if err := deliver(ctx, p, a, opts.Containerd, opts.Output, true, start); err != nil {
			return fmt.Errorf("offline image build: %w", err)
		}
		return nil
	}
	p.step("importing %s", opts.Tag)
	t = time.Now()
	if err := importDir(ctx, opts.Docker, rootfs, opts.Tag, labels, "shellbox sandbox image (debootstrap "+opts.Suite+")"); err != nil {
		return fmt.Errorf("offline image build: %w", err)
	}
	var size string
	if out, err := exec.CommandContext(ctx, opts.Docker, "image", "inspect", "-f", "{{.Id}} {{.Size}}", opts.Tag).Output(); err == nil {
		f := strings.Fields(string(out))
		if len(f) == 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			size = fmt.Sprintf(" (%s, %.0f MB)", shortID(f[0]), float64(n)/1e6)
		}
	}
	p.step("imported in %s", since(t))
	p.step("built %s%s in %s", opts.Tag, size, since(start))
	return nil
}

// BuildTest builds TestImage into Docker from the host's own binaries (see
// testimage/build.sh, embedded in this package). It is idempotent: when the
// rootfs the host would produce is unchanged nothing is imported, so calling
// it from every test run costs about a second. Needs bash, ldd, tar and the
// docker CLI; no root, no network.
func BuildTest(ctx context.Context, progress io.Writer) error {
	return BuildTestImage(ctx, TestOptions{}, progress)
}

// TestOptions configure BuildTestImage. The zero value builds TestImage
// into Docker, as BuildTest does.
type TestOptions struct {
	Tag string // default TestImage
	// Containerd, when not nil, receives the image instead of Docker: the
	// rootfs is archived here as an OCI image and imported with
	// ImportContainerd (nothing is imported when containerd already has
	// this very image, unpacked).
	Containerd *Containerd
	// Output, when set, is a file the OCI image archive is written to
	// instead of Docker (with Containerd, as well).
	Output string
	// Force imports even an unchanged image.
	Force  bool
	Docker string // docker CLI; default "docker"
}

// BuildTestImage builds the test image from the host's own binaries into
// Docker, containerd or an OCI archive file (see TestOptions). Needs bash
// and ldd, plus tar and the docker CLI for Docker; no root, no network.
func BuildTestImage(ctx context.Context, opts TestOptions, progress io.Writer) error {
	if opts.Tag == "" {
		opts.Tag = TestImage
	}
	p := newProgress(progress)
	if opts.Containerd == nil && opts.Output == "" {
		args := []string{"-c", testImageScript, "build.sh"}
		if opts.Force {
			args = append(args, "--force")
		}
		cmd := exec.CommandContext(ctx, "bash", args...)
		cmd.Env = append(os.Environ(), "SHELLBOX_TEST_IMAGE="+opts.Tag)
		if opts.Docker != "" {
			cmd.Env = append(cmd.Env, "DOCKER="+opts.Docker)
		}
		if err := p.run(ctx, "", cmd); err != nil {
			return fmt.Errorf("test image build: %w", err)
		}
		return nil
	}

	start := time.Now()
	if opts.Containerd != nil {
		if err := opts.Containerd.Ping(ctx); err != nil {
			return fmt.Errorf("test image build: %w", err)
		}
	}
	a, err := testArchive(ctx, opts.Tag, p)
	if err != nil {
		return fmt.Errorf("test image build: %w", err)
	}
	defer a.Close()
	return deliver(ctx, p, a, opts.Containerd, opts.Output, opts.Force, start)
}

// testArchive builds the test image's rootfs (build.sh --rootfs) and
// archives it as tag. Its Close removes the rootfs too.
func testArchive(ctx context.Context, tag string, p *progress) (_ *Archive, err error) {
	work, err := os.MkdirTemp("", "shellbox-testimage-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(work)
		}
	}()
	rootfs := filepath.Join(work, "rootfs")
	cmd := exec.CommandContext(ctx, "bash", "-c", testImageScript, "build.sh", "--rootfs", rootfs)
	if err := p.run(ctx, "", cmd); err != nil {
		return nil, err
	}
	return archiveWork(ctx, work, rootfs, ImageSpec{
		Name:    tag,
		Labels:  map[string]string{LabelImage: "test"},
		Comment: "shellbox test image (host binaries)",
		Owner:   testImageOwner,
	})
}

// archiveWork archives rootfs, a directory in work, deterministically
// (every mtime the epoch) with its layer in work, and removes rootfs; the
// archive's Close removes work.
func archiveWork(ctx context.Context, work, rootfs string, spec ImageSpec) (*Archive, error) {
	epoch := time.Unix(0, 0)
	spec.MTime, spec.TempDir = &epoch, work
	a, err := NewArchive(ctx, rootfs, spec)
	if err != nil {
		return nil, err
	}
	// The layer is in work: the rootfs is no longer needed.
	if err := os.RemoveAll(rootfs); err != nil {
		a.Close()
		return nil, err
	}
	a.cleanup = func() error { return os.RemoveAll(work) }
	return a, nil
}

// testImageOwner: everything is root's but the sandbox user's directories,
// as in build.sh's own tar.
func testImageOwner(name string) (int, int) {
	switch name {
	case "workspace", "home/sandbox":
		return SandboxUID, SandboxUID
	}
	return 0, 0
}

// deliver writes a to output (if set) and imports it into to (if set).
func deliver(ctx context.Context, p *progress, a *Archive, to *Containerd, output string, force bool, start time.Time) error {
	man := a.Manifest()
	p.step("image %s: manifest %s, layer %.1f MB gzipped (%s)", a.names[0], shortID(man.Digest.String()),
		float64(a.Layer().Size)/1e6, since(start))
	if output != "" {
		t := time.Now()
		if err := a.WriteFile(output); err != nil {
			return err
		}
		p.step("wrote the OCI image archive %s in %s (import: ctr -n shellbox images import %s)", output, since(t), output)
	}
	if to == nil {
		return nil
	}
	t := time.Now()
	c := to.withDefaults()
	imported, err := a.ImportContainerd(ctx, c, force)
	if err != nil {
		return err
	}
	if !imported {
		p.step("%s is up to date in containerd (namespace %s at %s); nothing imported", strings.Join(a.names, ", "), c.Namespace, c.Address)
	} else {
		p.step("imported %s into containerd (namespace %s at %s) and unpacked it in %s", strings.Join(a.names, ", "), c.Namespace, c.Address, since(t))
	}
	p.step("done in %s", since(start))
	return nil
}

// MirrorFromAPT finds the Debian mirror configured under root (normally "/")
// in etc/apt/sources.list and etc/apt/sources.list.d/*.list and *.sources
// (deb822). It takes enabled "deb" entries of the main archive (not
// security), preferring one that lists suite itself, then any ".../debian"
// archive, and returns the URI and the file it came from.
func MirrorFromAPT(root, suite string) (mirror, file string, err error) {
	files := []string{filepath.Join(root, "etc/apt/sources.list")}
	for _, pattern := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d", pattern))
		sort.Strings(m)
		files = append(files, m...)
	}
	var fallback, fallbackFile string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var entries []aptEntry
		if strings.HasSuffix(f, ".sources") {
			entries = parseDeb822(data)
		} else {
			entries = parseOneLine(data)
		}
		for _, e := range entries {
			if !e.usable() {
				continue
			}
			for _, s := range e.suites {
				if s == suite {
					return e.uri, f, nil
				}
			}
			// Without an exact match, a Debian archive (".../debian") beats
			// third-party repositories.
			if fallback == "" || (!isDebianArchive(fallback) && isDebianArchive(e.uri)) {
				fallback, fallbackFile = e.uri, f
			}
		}
	}
	if fallback != "" {
		return fallback, fallbackFile, nil
	}
	return "", "", fmt.Errorf("no Debian mirror found in %s", filepath.Join(root, "etc/apt"))
}

func isDebianArchive(uri string) bool {
	return strings.HasSuffix(strings.TrimRight(uri, "/"), "/debian")
}

type aptEntry struct {
	uri    string
	suites []string
}

// usable: an http(s)/file URI of the main archive, not the security one.
func (e aptEntry) usable() bool {
	if !(strings.HasPrefix(e.uri, "http://") || strings.HasPrefix(e.uri, "https://") || strings.HasPrefix(e.uri, "file:/")) {
		return false
	}
	if strings.Contains(e.uri, "security") {
		return false
	}
	for _, s := range e.suites {
		if strings.HasSuffix(s, "-security") || strings.HasSuffix(s, "/updates") {
			return false
		}
	}
	return len(e.suites) > 0
}

// parseOneLine reads "deb [options] uri suite [component...]" lines.
func parseOneLine(data []byte) []aptEntry {
	var out []aptEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			// Options: up to the field that ends with "]".
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) < 2 {
			continue
		}
		out = append(out, aptEntry{uri: f[0], suites: []string{f[1]}})
	}
	return out
}

// parseDeb822 reads deb822 stanzas (Types, URIs, Suites, Enabled).
func parseDeb822(data []byte) []aptEntry {
	var out []aptEntry
	flush := func(st map[string]string) {
		if len(st) == 0 {
			return
		}
		if strings.EqualFold(strings.TrimSpace(st["enabled"]), "no") {
			return
		}
		isDeb := false
		for _, t := range strings.Fields(st["types"]) {
			isDeb = isDeb || t == "deb"
		}
		if !isDeb {
			return
		}
		suites := strings.Fields(st["suites"])
		for _, uri := range strings.Fields(st["uris"]) {
			out = append(out, aptEntry{uri: uri, suites: suites})
		}
	}
	st := map[string]string{}
	last := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush(st)
			st, last = map[string]string{}, ""
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				st[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			st[last] = strings.TrimSpace(v)
		}
	}
	flush(st)
	return out
}

// trimRootfs removes what a container image does not need.
func trimRootfs(rootfs string) error {
	globs := []string{
		"var/cache/apt/archives/*.deb",
		"var/cache/apt/archives/partial/*",
		"var/cache/apt/*.bin",
		"var/lib/apt/lists/*_*",
		"var/cache/debconf/*-old",
		"var/lib/dpkg/*-old",
		"var/log/*.log",
		"var/log/apt/*",
		"debootstrap",
	}
	for _, g := range globs {
		m, err := filepath.Glob(filepath.Join(rootfs, g))
		if err != nil {
			return err
		}
		for _, f := range m {
			if err := os.RemoveAll(f); err != nil {
				return err
			}
		}
	}
	// Docker bind-mounts these; what debootstrap copied from the host must
	// not leak into the image.
	for _, f := range []string{"etc/resolv.conf", "etc/hostname", "etc/hosts", "etc/machine-id"} {
		path := filepath.Join(rootfs, f)
		if _, err := os.Lstat(path); err == nil {
			if err := os.Remove(path); err != nil {
				return err
			}
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// slimDpkgConfig is what debian:*-slim images install as
// /etc/dpkg/dpkg.cfg.d/docker so packages installed later stay slim too.
const slimDpkgConfig = `# Written by shellbox's image build, as in debian:*-slim images.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
`

// slimRootfs removes what slimDpkgConfig excludes and installs that config.
func slimRootfs(rootfs string) error {
	for _, dir := range []string{"groff", "info", "linda", "lintian/overrides", "locale", "man"} {
		m, err := filepath.Glob(filepath.Join(rootfs, "usr/share", dir, "*"))
		if err != nil {
			return err
		}
		for _, f := range m {
			if err := os.RemoveAll(f); err != nil {
				return err
			}
		}
	}
	docs := filepath.Join(rootfs, "usr/share/doc")
	pkgs, err := os.ReadDir(docs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, pkg := range pkgs {
		dir := filepath.Join(docs, pkg.Name())
		if !pkg.IsDir() {
			// Symlinks to another package's doc dir, and stray files.
			if err := os.Remove(dir); err != nil {
				return err
			}
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() == "copyright" {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	cfg := filepath.Join(rootfs, "etc/dpkg/dpkg.cfg.d")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg, "docker"), []byte(slimDpkgConfig), 0o644)
}

// importDir streams `tar -C dir -c .` into `docker import` as tag.
func importDir(ctx context.Context, docker, dir, tag string, labels map[string]string, message string) error {
	old := imageID(ctx, docker, tag)

	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"import", "--message", message}
	for _, k := range keys {
		args = append(args, "--change", "LABEL "+k+"="+strconv.Quote(labels[k]))
	}
	args = append(args,
		"--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--change", "WORKDIR /workspace",
		"--change", "USER "+strconv.Itoa(SandboxUID)+":"+strconv.Itoa(SandboxUID),
		"--change", `CMD ["/bin/bash"]`,
		"-", tag)

	tar := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "--xattrs", "-cf", "-", ".")
	imp := exec.CommandContext(ctx, docker, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	var tarErr, impErr, impOut bytes.Buffer
	tar.Stdout, tar.Stderr = pw, &tarErr
	imp.Stdin, imp.Stdout, imp.Stderr = pr, &impOut, &impErr
	if err := tar.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("tar: %w", err)
	}
	pw.Close()
	if err := imp.Start(); err != nil {
		pr.Close()
		_ = tar.Process.Kill()
		_ = tar.Wait()
		return fmt.Errorf("docker import: %w", err)
	}
	pr.Close()
	ierr := imp.Wait()
	terr := tar.Wait()
	if terr != nil {
		return fmt.Errorf("tar: %w: %s", terr, strings.TrimSpace(tarErr.String()))
	}
	if ierr != nil {
		return fmt.Errorf("docker import: %w: %s", ierr, strings.TrimSpace(impErr.String()))
	}
	// Drop the image this one replaced, unless something still uses it.
	if old != "" && old != imageID(ctx, docker, tag) {
		_ = exec.CommandContext(ctx, docker, "image", "rm", old).Run()
	}
	return nil
}

func imageID(ctx context.Context, docker, ref string) string {
	out, err := exec.CommandContext(ctx, docker, "image", "inspect", "-f", "{{.Id}}", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// removeRootfs deletes a build directory, first detaching anything a failed
// debootstrap left mounted inside it (it mounts proc and sysfs in the
// target), so RemoveAll never walks into a live mount.
func removeRootfs(work string) error {
	mounts, err := mountinfo.Under(work)
	if err != nil {
		return fmt.Errorf("cannot remove %s: %w", work, err)
	}
	for i := len(mounts) - 1; i >= 0; i-- { // deepest first
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	if mounts, _ = mountinfo.Under(work); len(mounts) > 0 {
		return fmt.Errorf("not removing %s: still mounted: %s", work, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(work)
}

// progress writes "==> [elapsed] " step lines and relays tools' output line
// by line, or (runLogged) a summary of it.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, start: time.Now()}
}

// elapsed is the time since the progress started, for step lines.
func (p *progress) elapsed() string {
	return fmt.Sprintf("[%5.1fs]", time.Since(p.start).Seconds())
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

func (p *progress) step(format string, args ...any) {
	p.printf("==> "+p.elapsed()+" "+format+"\n", args...)
}

// heartbeat is how often runLogged says a tool is still at the same phase.
const heartbeat = 10 * time.Second

// runLogged runs cmd with its stdout and stderr written to log, and prints
// a summary instead of the lines: the first line of each phase (the first
// line with a new first word after debootstrap's "I: ": Retrieving,
// Validating, Extracting, Unpacking, Configuring, ...; Retrieving and
// Validating alternate package by package and are shown once), warnings and
// errors ("W:", "E:") whole, and
// every heartbeat the latest line with the number of lines so far. The
// error carries the last lines of output.
func (p *progress) runLogged(ctx context.Context, name string, log io.Writer, cmd *exec.Cmd) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	var (
		last []string
		seen = map[string]bool{}
		n    int
	)
	lines := make(chan string)
	done := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		defer close(done)
		tick := time.NewTicker(heartbeat)
		defer tick.Stop()
		lastPrint := time.Now()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					return
				}
				n++
				_, _ = io.WriteString(log, line+"\n")
				if last = append(last, line); len(last) > 5 {
					last = last[1:]
				}
				word := line
				if rest, ok := strings.CutPrefix(line, "I: "); ok {
					word, _, _ = strings.Cut(rest, " ")
				}
				switch {
				case strings.HasPrefix(line, "W: ") || strings.HasPrefix(line, "E: "):
					p.printf("    %s %s: %s\n", p.elapsed(), name, line)
					lastPrint = time.Now()
				case !seen[word] && len(seen) < 100:
					seen[word] = true
					p.printf("    %s %s: %s\n", p.elapsed(), name, strings.TrimPrefix(line, "I: "))
					lastPrint = time.Now()
				}
			case <-tick.C:
				if time.Since(lastPrint) >= heartbeat && len(last) > 0 {
					p.printf("    %s %s: … %s (%d lines so far)\n", p.elapsed(), name, strings.TrimPrefix(last[len(last)-1], "I: "), n)
					lastPrint = time.Now()
				}
			}
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	return commandError(ctx, err, last)
}

func (p *progress) tail(name string, data []byte, n int) {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	p.step("last lines of %s:", name)
	for _, l := range lines {
		p.printf("    %s\n", l)
	}
}

// run runs cmd with its stdout and stderr relayed to the progress writer,
// each line prefixed with "prefix: " (when prefix is not empty). The error
// carries the last lines of output.
func (p *progress) run(ctx context.Context, prefix string, cmd *exec.Cmd) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	var last []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if prefix != "" {
				p.printf("    %s: %s\n", prefix, line)
			} else {
				p.printf("    %s\n", line)
			}
			if last = append(last, line); len(last) > 5 {
				last = last[1:]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	return commandError(ctx, err, last)
}

// commandError is a relayed command's error with the last lines it printed;
// the context's error when the context ended it.
func commandError(ctx context.Context, err error, last []string) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case len(last) > 0:
		return fmt.Errorf("%w: %s", err, strings.Join(last, " | "))
	}
	return err
}

func since(t time.Time) string {
	return time.Since(t).Round(100 * time.Millisecond).String()
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}
