//! `e2bx`: the command line a new user starts with.

fn main() {
    println!("e2bx: not yet implemented");
}
