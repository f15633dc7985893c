mod revert_point;
