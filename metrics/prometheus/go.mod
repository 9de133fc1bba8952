module github.com/agentserve/sessionaffinity/metrics/prometheus

go 1.25.0

replace github.com/agentserve/sessionaffinity => ../..

require (
	github.com/prometheus/client_golang v1.24.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
