pub mod crash;
