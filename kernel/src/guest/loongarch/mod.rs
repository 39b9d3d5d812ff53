//! LoongArch guest state that kestrel's trap-and-emulate backend keeps in
//! software, portable and host-tested: the decoder of trapping instructions
//! ([`insn`]), the virtual CSR file with exception delivery ([`csr`]), the
//! guest's software TLB and page-walk instructions ([`tlb`]) and the IOCSR
//! space with the IPI block ([`iocsr`]), and KVM's steal-time record the
//! LVZ backend keeps for a Linux guest ([`steal`]). The arch code in
//! `arch/loongarch64/vm` applies them to real registers and memory.

pub mod csr;
pub mod efi;
pub mod emulate;
pub mod exit;
pub mod gtimer;
pub mod insn;
pub mod intc;
pub mod iocsr;
pub mod layout;
pub mod steal;
pub mod tlb;
