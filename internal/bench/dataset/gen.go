package dataset

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"
)

// appEntries generates an application layer: source-like text files under
// /app/<name>, a VERSION file and a config under /etc/<name>. The first
// a.changed files depend on the version, the others on the name only, so
// two versions of an application share all but a few files.
func appEntries(a *appSpec, mtime time.Time) []*entry {
	var out []*entry
	for i := range a.files {
		seed := a.name
		if i < a.changed {
			seed += "@" + a.version
		}
		// Names and sizes stay across versions; content changes.
		fixed := rand.New(rand.NewPCG(hash64(a.name), uint64(i)))
		size := 2<<10 + fixed.IntN(46<<10)
		name := fmt.Sprintf("app/%s/src/%s_%02d.py", a.name, words[fixed.IntN(len(words))], i)
		rng := rand.New(rand.NewPCG(hash64(seed), uint64(i)))
		out = append(out, fileEntry(name, sourceText(rng, size), mtime))
	}
	out = append(out,
		fileEntry("app/"+a.name+"/VERSION", []byte(a.version+"\n"), mtime),
		fileEntry("etc/"+a.name+"/config.yaml", fmt.Appendf(nil,
			"name: %s\nversion: %s\nlisten: 0.0.0.0:8080\nworkers: 4\nlog:\n  level: info\n  format: json\n", a.name, a.version), mtime))
	return out
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

var words = strings.Fields(`request response handler server client config value result
	error context buffer reader writer stream digest layer image manifest index blob
	cache store table record field parse render format encode decode token session
	user account order payment invoice item price count total status update delete`)

// sourceText makes about size bytes of indented, code-like lines.
func sourceText(rng *rand.Rand, size int) []byte {
	var b strings.Builder
	for b.Len() < size {
		switch rng.IntN(6) {
		case 0:
			fmt.Fprintf(&b, "\ndef %s_%s(%s, %s):\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))])
		case 1:
			fmt.Fprintf(&b, "    # %s %s %s the %s\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))])
		case 2:
			fmt.Fprintf(&b, "    if %s is None:\n        raise ValueError(%q)\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))]+" missing")
		default:
			fmt.Fprintf(&b, "    %s = %s.%s(%s, %d)\n", words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(10000))
		}
	}
	return []byte(b.String())
}
