package driver

import "context"

// FileStater is implemented by drivers whose Stat costs more than one
// request for a path that is not a file: an object store has no
// directories, so Stat must list to tell a missing path from a directory
// (S3: a HEAD then a LIST). Most paths the registry stats can only be
// files (blob data, links), and a missing one is common (every push checks
// its blobs first), so StatFile skips that listing.
type FileStater interface {
	// StatFile describes the regular file at path, in one request on an
	// object store. A missing path, a directory and "/" are all a
	// PathNotFoundError; an invalid path is an InvalidPathError.
	StatFile(ctx context.Context, path string) (FileInfo, error)
}

// StatFile describes the regular file at path with d's StatFile when d, or
// a driver it wraps (see As), implements FileStater, and otherwise with
// Stat, taking a directory for a missing file so that every driver answers
// alike.
func StatFile(ctx context.Context, d Driver, path string) (FileInfo, error) {
	if fs, ok := As[FileStater](d); ok {
		return fs.StatFile(ctx, path)
	}
	fi, err := d.Stat(ctx, path)
	if err == nil && fi.IsDir {
		return FileInfo{}, PathNotFoundError{Path: path, Driver: d.Name()}
	}
	return fi, err
}
