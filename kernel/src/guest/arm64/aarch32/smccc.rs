//! SMCCC calls from an AArch32 EL1 (HVC32, or SMC32 trapped): which calls a
//! 32-bit caller may make and kestrel's 32-bit calling convention for its
//! vendor hypervisor service (docs/hypercalls.md, "from a 32-bit guest").
//!
//! A 32-bit caller passes the function id in r0 and arguments in r1-r5
//! and gets 32-bit results in r0-r3. SMCCC's SMC64 convention (bit 30 of
//! the id) does not exist for it: the SMC64 ids of the architecture
//! (PSCI, SMCCC) and of the standard hypervisor service (stolen time) are
//! NOT_SUPPORTED. kestrel's vendor calls keep their numbers (also
//! `0xC600_0002`, the PV IPI): the IPI window's 128-bit bitmap becomes 64
//! bits in r1 (bits 0-31) and r2 (bits 32-63) with `min` in r3, and a
//! statistics counter comes back as r0 = its low and r1 = its high word.

use kestrel_abi::arm64::{IPI_SEND, STATS};

/// SMCCC's SMC64/HVC64 bit of a function id.
pub const SMC64: u32 = 1 << 30;

/// What kestrel does with a call from AArch32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call32 {
    /// PSCI or an SMCCC architecture call with its SMC32 id: to the PSCI
    /// handler with these four registers.
    Psci([u64; 4]),
    /// An SMC64 id of the architecture or standard service: NOT_SUPPORTED.
    NotSupported,
    /// Any other id: kestrel's hypercall dispatch with this function and
    /// these AArch64-convention arguments.
    Vendor { function: u64, args: [u64; 5] },
}

/// Classifies a call from the 32-bit registers `r` (r0-r5, upper halves
/// ignored). `arch_or_standard`: the id is in the architecture, PSCI or
/// standard hypervisor service ranges (`psci::is_psci_or_arch`,
/// `steal::is_standard_hyp`).
pub fn classify(r: [u64; 6], arch_or_standard: bool, standard: bool) -> Call32 {
    let w = r.map(|v| v & 0xffff_ffff);
    let f = w[0] as u32;
    if arch_or_standard {
        return if f & SMC64 != 0 || standard {
            Call32::NotSupported
        } else {
            Call32::Psci([w[0], w[1], w[2], w[3]])
        };
    }
    let args = if f == IPI_SEND {
        [w[1] | (w[2] << 32), 0, w[3], 0, 0]
    } else {
        [w[1], w[2], w[3], w[4], w[5]]
    };
    Call32::Vendor {
        function: w[0],
        args,
    }
}

/// The 32-bit result registers of vendor call `function` that returned
/// the AArch64 registers `x` (x0 first, at most four): the values for r0,
/// r1, .. (as many as are results).
pub fn vendor_results(function: u64, x: &[u64]) -> heapless::Vec<u64, 4> {
    let mut out = heapless::Vec::new();
    match x.first() {
        Some(&v) if function as u32 == STATS && (v as i64) >= 0 => {
            let _ = out.push(v & 0xffff_ffff);
            let _ = out.push(v >> 32);
        }
        _ => {
            for &v in x.iter().take(4) {
                let _ = out.push(v & 0xffff_ffff);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psci_smc32_goes_through_smc64_is_refused() {
        let cpu_on = [0x8400_0003, 1, 0x4000_8000, 0x5a5a, 0, 0];
        assert_eq!(
            classify(cpu_on, true, false),
            Call32::Psci([0x8400_0003, 1, 0x4000_8000, 0x5a5a])
        );
        // Stale upper halves of the X registers are not the caller's.
        let dirty = cpu_on.map(|v| v | 0xdead_0000_0000_0000);
        assert_eq!(classify(dirty, true, false), classify(cpu_on, true, false));
        assert_eq!(
            classify([0xC400_0003, 1, 0, 0, 0, 0], true, false),
            Call32::NotSupported
        );
        // Stolen time is SMC64 only.
        assert_eq!(
            classify([0xC500_0020, 0, 0, 0, 0, 0], true, true),
            Call32::NotSupported
        );
        assert_eq!(
            classify([0x8500_0020, 0, 0, 0, 0, 0], true, true),
            Call32::NotSupported
        );
    }

    #[test]
    fn pv_ipi_window_is_64_bits_in_r1_r2() {
        let c = classify([IPI_SEND as u64, 0x8000_0001, 0x3, 2, 9, 9], false, false);
        assert_eq!(
            c,
            Call32::Vendor {
                function: IPI_SEND as u64,
                args: [0x3_8000_0001, 0, 2, 0, 0]
            }
        );
        let other = classify([0xC600_0001, 7, 8, 9, 10, 11], false, false);
        assert_eq!(
            other,
            Call32::Vendor {
                function: 0xC600_0001,
                args: [7, 8, 9, 10, 11]
            }
        );
    }

    #[test]
    fn results_are_words_and_a_counter_is_split() {
        assert_eq!(
            vendor_results(STATS as u64, &[0x1_2345_6789]).as_slice(),
            [0x2345_6789, 1]
        );
        // An error stays -2 in r0's 32 bits, and only r0 is written.
        assert_eq!(
            vendor_results(STATS as u64, &[(-2i64) as u64]).as_slice(),
            [0xffff_fffe]
        );
        assert_eq!(
            vendor_results(0x8600_FF01, &[u64::MAX, 1 << 40, 3, 4]).as_slice(),
            [0xffff_ffff, 0, 3, 4]
        );
        assert!(vendor_results(STATS as u64, &[]).is_empty());
    }
}
