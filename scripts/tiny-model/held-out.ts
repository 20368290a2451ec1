/**
 * The tools of the published servers the general model is trained on by GRPO (server-memory, server-filesystem):
 * nothing in its warm-up — synthetic servers, open drills — may call a tool of these names, so that what it learns
 * there is learnt on a server it never saw.
 */
export const HELD_OUT_TOOLS = [
  'create_entities', 'create_relations', 'add_observations', 'delete_entities', 'delete_observations', 'delete_relations', 'read_graph', 'search_nodes', 'open_nodes',
  'read_file', 'read_text_file', 'read_media_file', 'read_multiple_files', 'write_file', 'edit_file', 'create_directory', 'list_directory',
  'list_directory_with_sizes', 'directory_tree', 'move_file', 'search_files', 'get_file_info', 'list_allowed_directories',
] as const;
