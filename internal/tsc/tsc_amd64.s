#include "textflag.h"

// func Read() uint64
TEXT ·Read(SB), NOSPLIT, $0-8
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// func ReadOrdered() uint64
TEXT ·ReadOrdered(SB), NOSPLIT, $0-8
	RDTSCP
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// func hasRDTSCP() bool
TEXT ·hasRDTSCP(SB), NOSPLIT, $0-1
	MOVL $0x80000000, AX
	CPUID
	CMPL AX, $0x80000001
	JB   no
	MOVL $0x80000001, AX
	XORL CX, CX
	CPUID
	SHRL $27, DX
	ANDL $1, DX
	MOVB DX, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET

// func ReadPrefetching(addr, addr2, waddr uintptr) uint64
TEXT ·ReadPrefetching(SB), NOSPLIT, $0-32
	MOVQ       addr+0(FP), AX
	MOVQ       addr2+8(FP), CX
	MOVQ       waddr+16(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 (CX)
	// PREFETCHW (BX), which the Go assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x0B
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+24(FP)
	RET
