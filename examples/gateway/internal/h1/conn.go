package h1

// conn is one client connection and its serving loop.
type conn struct{}
