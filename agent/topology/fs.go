package topology

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxSymlinks bounds symlink resolution like the kernel's own ELOOP limit.
const maxSymlinks = 40

// maxFileSize bounds what is read from one sysfs file: the largest real ones (a node's
// meminfo, a 8192-CPU mask) are a few KiB, so a bigger file is not sysfs.
const maxFileSize = 1 << 20

// root is a sysfs/procfs tree. Paths given to its methods are slash-separated and
// relative to it ("sys/devices/system/node"), so the same code reads the live system
// (root "/") and a copied tree, as prometheus/procfs does.
type root string

func (r root) abs(rel string) string {
	return filepath.Join(string(r), filepath.FromSlash(rel))
}

// display names a file for an error message the way an operator would look for it.
func (r root) display(rel string) string {
	return r.abs(rel)
}

// readFile returns the trimmed content of a sysfs file. A missing file is reported as
// fs.ErrNotExist (callers treat it as "no data"); other failures name the file.
func (r root) readFile(rel string) (string, error) {
	f, err := os.Open(r.abs(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("reading %s: %w", r.display(rel), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", r.display(rel), err)
	}
	if len(b) > maxFileSize {
		return "", fmt.Errorf("reading %s: larger than %d bytes", r.display(rel), maxFileSize)
	}
	return trimSysfs(string(b)), nil
}

// readDir lists a directory's entry names; a missing directory is fs.ErrNotExist.
func (r root) readDir(rel string) ([]string, error) {
	ents, err := os.ReadDir(r.abs(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("listing %s: %w", r.display(rel), err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// linkBase returns the last element of a symlink's target (a "driver" link names the
// driver this way), without requiring the target to exist.
func (r root) linkBase(rel string) (string, error) {
	t, err := os.Readlink(r.abs(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("reading link %s: %w", r.display(rel), err)
	}
	return path.Base(filepath.ToSlash(t)), nil
}

// resolve follows every symlink in rel and returns the real path relative to the root.
// Absolute link targets are taken relative to the root, not the host, so a copied tree
// never reaches out into the live /sys. A dangling link is fs.ErrNotExist, wrapped with
// the link's name.
func (r root) resolve(rel string) (string, error) {
	todo := splitPath(rel)
	var done []string
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == ".." {
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		done = append(done, c)
		cur := strings.Join(done, "/")
		fi, err := os.Lstat(r.abs(cur))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("resolving %s: %s does not exist: %w", r.display(rel), r.display(cur), fs.ErrNotExist)
			}
			return "", fmt.Errorf("resolving %s: %w", r.display(rel), err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("resolving %s: too many levels of symbolic links", r.display(rel))
		}
		t, err := os.Readlink(r.abs(cur))
		if err != nil {
			return "", fmt.Errorf("resolving %s: %w", r.display(rel), err)
		}
		t = filepath.ToSlash(t)
		done = done[:len(done)-1]
		if strings.HasPrefix(t, "/") {
			done = nil
		}
		todo = append(splitPath(t), todo...)
	}
	return strings.Join(done, "/"), nil
}

func splitPath(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
