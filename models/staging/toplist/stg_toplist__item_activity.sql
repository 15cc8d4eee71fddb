{#- What each minute counts per city x restaurant x item and type, as stored (uniqExact
    states, sql/0017), unmerged: a window merges the states of its minutes. -#}

select minute, city_id, restaurant_id, item_id, type, counted
from {{ source('toplist', 'item_activity_by_minute') }}
