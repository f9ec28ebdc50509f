// Package cache holds the byte-bounded caches that hide the cost of serving
// deduplicated layers: an on-disk preconstruct cache of restored layers
// (Disk) and an in-memory prefetch cache of intact layers on slow storage
// backends (Memory), each kept in an internal/arc Cache.
//
// Both caches fill each key at most once at a time (singleflight) and are
// bounded in bytes, not in entries, because layers range from bytes to
// gigabytes.
package cache
