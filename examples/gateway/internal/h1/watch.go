package h1

// sweeper starts the client-gone watchers of a Server's long requests.
type sweeper struct{}
