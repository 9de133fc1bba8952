package gateway

// WithFirstScrapeTimeout shortens the first-scrape timeout of the load scrape for the
// black-box tests (firstScrapeTimeout is 1 s).
var WithFirstScrapeTimeout = withFirstScrapeTimeout
