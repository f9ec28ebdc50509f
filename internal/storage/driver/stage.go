package driver

import "context"

// Stager is implemented by drivers that can write a file out of sight and
// then show it whole: object stores, whose uploads (multipart, resumable,
// staged blocks) are invisible until completed. A blob whose digest the
// client names before sending it (a monolithic upload) is written this way
// straight to its own path once verified, where a file written in place
// would have to be written elsewhere and moved, on an object store a copy
// of every byte.
type Stager interface {
	// StageWriter returns a writer of new content for the file at path.
	// Nothing of it is visible at path until Commit, which replaces the
	// file at once. Cancel, and Close (which is Cancel here: nothing is
	// kept to append to), drop what was staged and leave the file at path,
	// if there is one, as it was.
	StageWriter(ctx context.Context, path string) (FileWriter, error)
}
