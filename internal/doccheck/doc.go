// Package doccheck holds the test that keeps the docs' Go true to the
// code: every Go block of README.md and docs/*.md type-checks against this
// module and its dependencies. It has no code of its own. The messages the
// docs quote are checked where they are printed, by the tests of each
// command (internal/cli/...), against the docs' own lines.
package doccheck
