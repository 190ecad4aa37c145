//! `fleet-produce redis-acl`: the ACL SETUSER commands of the worker and
//! client Redis users for this release's key prefix, to paste into Redis.

use clap::Args;
use fleet_connect::acl;
use fleet_proto::Namespace;

#[derive(Args)]
pub struct AclArgs {
    #[arg(long, default_value = "fleet-worker")]
    worker_user: String,
    #[arg(long, default_value = "fleet-client")]
    client_user: String,
}

pub fn run(names: &Namespace, args: AclArgs) {
    println!("{}", acl::setuser_command(acl::Role::Worker, &args.worker_user, names));
    println!("{}", acl::setuser_command(acl::Role::Client, &args.client_user, names));
}
