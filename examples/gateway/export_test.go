package gateway

// WithFirstScrapeTimeout shortens the first-scrape timeout of the load scrape for the
// black-box tests (firstScrapeTimeout is 1 s).
var WithFirstScrapeTimeout = withFirstScrapeTimeout

// WithSnapshotLockWait bounds Serve's wait for binding_snapshot's lock for the tests.
var WithSnapshotLockWait = withSnapshotLockWait
