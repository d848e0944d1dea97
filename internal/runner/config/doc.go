// Package config holds what runnerd is told and tells before its control
// loop starts: its build metadata (--build-metadata).
package config
