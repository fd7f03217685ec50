// Package report holds the small helpers that the benchmark programs in
// bench/cmd (ratios, accuracy, shaping, distbench) share to turn repeated
// measurements into the Markdown tables of docs/performance.md: the median
// of a set of rounds, the ratio of two medians with the range of the
// per-round ratios, the number format of the tables, and the machine and
// load-average notes printed next to them.
//
// It exists so that every table is summarised and formatted the same way:
// a fix to, say, how a ratio's range is computed then reaches all programs
// at once instead of one copy of four.
package report
