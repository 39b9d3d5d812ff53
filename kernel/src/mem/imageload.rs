//! A VM's images copied into its RAM in bounded steps: the job a restart
//! leaves to the restarting VM's boot vCPU, so that reloading a 64 MiB
//! initrd costs that VM its own time, a step per run of its vCPU, and no
//! other VM's (a restart that copied every image at once stalled a victim
//! sharing the pCPU for 50 ms and more, growing with the image).
//!
//! An [`ImageLoad`] is a list of [`Piece`]s (a guest address and the bytes
//! to put there) and a cursor. Each [`ImageLoad::step`] copies at most
//! [`LOAD_STEP`] bytes, and never across a boundary of the RAM's blocks
//! (the caller's `block` size), so a step zeroes at most one untouched
//! block of lazily zeroed RAM before it copies: a step costs no more than
//! one exit's device work does (`dev::virtio::BUDGET_BYTES` of copying and
//! one first-touch zeroing).

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Bytes one [`ImageLoad::step`] copies at most.
pub const LOAD_STEP: usize = 64 << 10;

/// Bytes to put at a guest address.
#[derive(Clone, Debug)]
pub struct Piece {
    /// Where (the backend's guest address: an IPA, a RAM offset).
    pub at: u64,
    pub data: Cow<'static, [u8]>,
    /// What it is, for errors: "kernel", "initrd", "dtb".
    pub what: &'static str,
}

impl Piece {
    pub fn new(at: u64, data: impl Into<Cow<'static, [u8]>>, what: &'static str) -> Piece {
        Piece {
            at,
            data: data.into(),
            what,
        }
    }
}

/// The pieces still to copy and how far the copying is.
#[derive(Debug, Default)]
pub struct ImageLoad {
    pieces: Vec<Piece>,
    /// The piece being copied.
    piece: usize,
    /// Its bytes already copied.
    offset: usize,
}

impl ImageLoad {
    pub fn new(pieces: Vec<Piece>) -> ImageLoad {
        ImageLoad {
            pieces,
            piece: 0,
            offset: 0,
        }
    }

    /// Whether every piece is in.
    pub fn is_done(&self) -> bool {
        self.piece >= self.pieces.len()
    }

    /// Bytes still to copy.
    pub fn remaining(&self) -> u64 {
        let rest: usize = self
            .pieces
            .iter()
            .skip(self.piece)
            .map(|p| p.data.len())
            .sum();
        (rest - self.offset.min(rest)) as u64
    }

    /// Copies the next bytes, at most `max` and within one `block`
    /// (a power of two) of the guest's addresses, through `copy` (guest
    /// address, bytes). `Ok(true)`: every piece is in. An error names the
    /// piece; the load stops there.
    pub fn step(
        &mut self,
        max: usize,
        block: u64,
        mut copy: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<bool, String> {
        // Empty pieces take no step.
        while self
            .pieces
            .get(self.piece)
            .is_some_and(|p| self.offset >= p.data.len())
        {
            self.piece += 1;
            self.offset = 0;
        }
        let Some(p) = self.pieces.get(self.piece) else {
            return Ok(true);
        };
        let at =
            p.at.checked_add(self.offset as u64)
                .ok_or_else(|| format!("{}: address overflow", p.what))?;
        let to_block = block - (at & (block - 1));
        let n = (p.data.len() - self.offset)
            .min(max.max(1))
            .min(usize::try_from(to_block).unwrap_or(usize::MAX));
        copy(at, &p.data[self.offset..self.offset + n]).map_err(|e| format!("{}: {e}", p.what))?;
        self.offset += n;
        if self.offset >= p.data.len() {
            self.piece += 1;
            self.offset = 0;
        }
        Ok(self.is_done())
    }

    /// Every piece at once: where nobody waits (a VM's creation, before
    /// any VM runs).
    pub fn run_all(
        &mut self,
        block: u64,
        mut copy: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        while !self.step(usize::MAX, block, &mut copy)? {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const BLOCK: u64 = 2 << 20;

    /// A fake RAM: 8 MiB at guest address 0x4000_0000; counts the blocks
    /// each copy touches.
    struct Ram {
        bytes: Vec<u8>,
        touched: Vec<bool>,
    }

    impl Ram {
        fn new() -> Ram {
            Ram {
                bytes: vec![0; 8 << 20],
                touched: vec![false; 4],
            }
        }

        /// Copies; returns how many blocks it touched first.
        fn copy(&mut self, at: u64, data: &[u8]) -> Result<usize, String> {
            let off = at
                .checked_sub(0x4000_0000)
                .filter(|o| o + data.len() as u64 <= self.bytes.len() as u64)
                .ok_or_else(|| format!("{at:#x} outside RAM"))? as usize;
            self.bytes[off..off + data.len()].copy_from_slice(data);
            let mut first = 0;
            for b in off / BLOCK as usize..=(off + data.len() - 1) / BLOCK as usize {
                if !core::mem::replace(&mut self.touched[b], true) {
                    first += 1;
                }
            }
            Ok(first)
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn steps_are_bounded_touch_one_block_and_put_every_byte_in_place() {
        let kernel = pattern(3 << 20, 1);
        let initrd = pattern(3 * LOAD_STEP + 17, 2);
        let dtb = pattern(4000, 3);
        let mut load = ImageLoad::new(vec![
            Piece::new(0x4000_0000 + 0x1000, kernel.clone(), "kernel"),
            Piece::new(0x4000_0000 + (5 << 20) - 100, initrd.clone(), "initrd"),
            Piece::new(0x4000_0000 + (8 << 20) - 4000, dtb.clone(), "dtb"),
            Piece::new(0x4000_0000, Vec::new(), "empty"),
        ]);
        let total = load.remaining();
        assert_eq!(total, (kernel.len() + initrd.len() + dtb.len()) as u64);
        let mut ram = Ram::new();
        let mut steps = 0;
        loop {
            let before = load.remaining();
            let done = load
                .step(LOAD_STEP, BLOCK, |at, d| {
                    assert!(d.len() <= LOAD_STEP && !d.is_empty());
                    assert_eq!(at / BLOCK, (at + d.len() as u64 - 1) / BLOCK, "one block");
                    assert!(ram.copy(at, d)? <= 1);
                    Ok(())
                })
                .unwrap();
            steps += 1;
            assert!(load.remaining() < before || done);
            if done {
                break;
            }
            assert!(steps < 1000);
        }
        assert!(load.is_done() && load.remaining() == 0);
        assert!(steps as u64 >= total / LOAD_STEP as u64);
        assert_eq!(&ram.bytes[0x1000..0x1000 + kernel.len()], &kernel[..]);
        let i = (5 << 20) - 100;
        assert_eq!(&ram.bytes[i..i + initrd.len()], &initrd[..]);
        assert_eq!(&ram.bytes[(8 << 20) - 4000..], &dtb[..]);
        // Done stays done.
        assert_eq!(load.step(LOAD_STEP, BLOCK, |_, _| unreachable!()), Ok(true));
    }

    #[test]
    fn an_error_names_the_piece_and_run_all_copies_everything() {
        let mut load = ImageLoad::new(vec![
            Piece::new(0x4000_0000, pattern(100, 1), "kernel"),
            Piece::new(0x5000_0000, pattern(100, 2), "initrd"),
        ]);
        let mut ram = Ram::new();
        let e = load.run_all(BLOCK, |at, d| ram.copy(at, d).map(|_| ()));
        assert_eq!(e, Err(String::from("initrd: 0x50000000 outside RAM")));
        let mut load = ImageLoad::new(vec![Piece::new(u64::MAX - 1, pattern(100, 1), "dtb")]);
        let e = load.run_all(BLOCK, |at, d| ram.copy(at, d).map(|_| ()));
        assert!(e.is_err_and(|e| e.starts_with("dtb: ")));
        let big = pattern(5 << 20, 9);
        let mut load = ImageLoad::new(vec![Piece::new(0x4000_0000, big.clone(), "kernel")]);
        let mut ram = Ram::new();
        load.run_all(BLOCK, |at, d| ram.copy(at, d).map(|_| ()))
            .unwrap();
        assert_eq!(&ram.bytes[..big.len()], &big[..]);
    }
}
