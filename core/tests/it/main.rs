mod contract_bus;
mod contract_repo;
