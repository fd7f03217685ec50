//go:build !race

package docstest

const raceBuild = false
